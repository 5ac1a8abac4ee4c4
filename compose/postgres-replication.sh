#!/usr/bin/env bash
# Run once by the postgres image when it creates the primary's data directory
# (compose/cluster.yml): lets the replica stream from it with the superuser's password.
# The image's own rule (`host all all all ...`) does not cover replication connections.
set -euo pipefail
echo "host replication all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
