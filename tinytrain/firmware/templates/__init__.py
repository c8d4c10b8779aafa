"""Jinja2 templates of the firmware project (linker script, Makefile, platformio.ini, board header)."""
