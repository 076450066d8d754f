"""Command-line tools: Apache Kafka's bin/kafka-*.sh with the same flags and output formats.

One module per tool, each runnable as ``python -m broker.tools.<tool>``; bin/*.sh are thin wrappers.
Shared plumbing (argument parsing with one-line errors, --command-config, running the async client)
lives in ``broker.tools.common``.
"""
