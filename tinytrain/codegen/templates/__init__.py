"""Jinja2 templates of the emitted C project, shipped as package data."""
