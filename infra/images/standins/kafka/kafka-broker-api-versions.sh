#!/bin/sh
# The compose healthcheck's command, as the upstream image has it: here, success when the
# broker's listener (--bootstrap-server HOST:PORT) takes a connection.
server=127.0.0.1:9092
while [ $# -gt 0 ]; do
    [ "$1" = "--bootstrap-server" ] && server=$2
    shift
done
exec python3 -c "import socket, sys; host, port = sys.argv[1].rsplit(':', 1); socket.create_connection((host, int(port)), 5).close()" "$server"
