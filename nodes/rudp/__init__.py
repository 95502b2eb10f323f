"""Reliable UDP bulk transfer in blocks (seed 004): sans-I/O sender and receiver cores, datagram codec, asyncio drivers."""
