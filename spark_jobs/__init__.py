"""PySpark data source and batch jobs over Kafka log segments.

They need the project's `spark` extra (PySpark, pyarrow): `pip install -e '.[spark]'`, which
`make install` and `make test` do; `make run` installs only the broker's dependencies.
"""
