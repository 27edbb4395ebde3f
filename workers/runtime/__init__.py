"""What a worker process is: start-up, presence, heartbeat, the realtime lane, the engine it
holds, recycling and shutdown. Imports nothing from workers.jobs or workers.book."""
