"""End-to-end tests: real gateway, leader and handler processes on real NATS and etcd."""
