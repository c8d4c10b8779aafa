"""The field runtime's status, one name per value of ``tt_field_status`` in order: the classifier's runtime
(runtime.py) and the autoencoder's (anomaly.py) report the same eight, read back by host.py and board.py."""

STATUS = ("labelled", "learned", "steps", "rollbacks", "checks", "alarms", "active", "since")
