#!/bin/sh
# As the upstream image's entrypoint: redis-server with flags only gets --protected-mode no.
set -e
if [ "$1" = "redis-server" ]; then
    case " $* " in
        *" --protected-mode "*|*".conf "*) ;;
        *) set -- "$@" --protected-mode no ;;
    esac
fi
exec "$@"
