"""The broker: asyncio server, request handlers, replica manager, metadata."""
