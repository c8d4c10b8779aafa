"""Hand-written C runtime shipped as package data and copied into every emitted project."""
