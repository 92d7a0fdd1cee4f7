#!/bin/sh
# Debian's nginx loads the stream module dynamically, and before 1.27.3 open-source nginx
# has no `resolve` on an upstream server (names are resolved at start, which compose's
# depends_on allows: the gateways and leaders exist before nginx starts). So the mounted
# configuration runs with the module loaded and `resolve` dropped.
set -e
conf=/etc/nginx/nginx.conf
if [ "$1" = "nginx" ] && [ -f "$conf" ]; then
    {
        echo "load_module /usr/lib/nginx/modules/ngx_stream_module.so;"
        sed 's/ resolve / /' "$conf"
    } > /etc/nginx/standin.conf
    shift
    exec nginx -c /etc/nginx/standin.conf "$@"
fi
exec "$@"
