"""C sources of the firmware (startup, tick counter, harnesses, UART drivers), shipped as package data."""
