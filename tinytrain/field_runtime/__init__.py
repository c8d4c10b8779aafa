"""Learning in the field: replay, drift detection, class-incremental heads and a guard around the training step.

    config.py   FieldConfig: the runtime's compile-time sizes and thresholds
    program.py  a model and plan cut at the frozen prefix (latent replay): the cut model, its training graph
    rng.py      xorshift32, the runtime's only source of randomness (the C draws the same numbers)
    buffer.py   the replay buffer (class-balanced reservoir) and the guard set (reservoir)
    drift.py    integer drift statistics: feature-mean shift at the cut, confidence EMA, alarms
    head.py     class-incremental heads: a new class's row imprinted from the buffer
    step.py     the simulator's training step on latents (the spec of the C calls)
    runtime.py  FieldRuntime: learn / observe / drift / guard, the spec of the emitted C runtime
    anomaly.py  AnomalyRuntime: an autoencoder's anomaly score, drift on it, learning normal samples (the spec)
    anomaly_host.py / anomaly_run.py  its C and host build; a stream through it (``tinytrain field`` on an AE)
"""
