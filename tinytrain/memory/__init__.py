"""Memory planning: buffer lifetimes over a schedule, arena planners, SRAM / flash accounting."""
