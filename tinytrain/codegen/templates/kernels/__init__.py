"""One template per kernel family; parameters specialize kernel size, stride, padding and variant."""
