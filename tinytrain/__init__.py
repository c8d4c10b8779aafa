"""tinytrain: an ahead-of-time compiler for on-device training of int8 MobileNets on microcontrollers."""

__version__ = "0.1.0"
