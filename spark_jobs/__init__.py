"""PySpark data source and batch jobs over Kafka log segments."""
