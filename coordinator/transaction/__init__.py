"""The transaction coordinator: Kafka's transactions as a pure state machine (see manager.py)."""
