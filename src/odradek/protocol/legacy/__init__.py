"""Hand-written codecs for protocol versions older than Kafka 4's minimums (which kio,
generated from Kafka 4's schemas, does not have). The broker's handler registry plugs
them in per version (broker/registry.py `handles(..., codecs=...)`)."""
