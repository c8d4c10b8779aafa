"""The training step as an IR graph: autodiff, QAS + update, sparse-update plans, pruning, new head.

``build_training_graph`` (train_graph.py) composes the passes; each pass is Graph in -> Graph out and
states the invariant it keeps.
"""
