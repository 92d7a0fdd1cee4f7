"""Run the real servers (nats-server, etcd, redis-server) without Docker: see servers.py."""
