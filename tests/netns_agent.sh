#!/bin/sh
# mpirun's remote launcher for tests/test_mpi_net.sh (--mca plm_rsh_agent): mpirun calls it as
# "netns_agent.sh HOST COMMAND..." where ssh would log in to HOST; here HOST names a network
# namespace of this machine, and COMMAND (Open MPI's daemon, orted) is run inside it.
host=$1
shift
exec ip netns exec "$host" sh -c "$*"
