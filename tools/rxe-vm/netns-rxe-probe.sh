#!/usr/bin/env bash
# Can Soft-RoCE connect two network namespaces inside the rxe guest (what
# ciuic-run --hosts would need for verbs between simulated hosts)? Run as
#   tools/rxe-vm/rxe-vm run -- bash tools/rxe-vm/netns-rxe-probe.sh
# It makes namespaces a and b joined by a veth pair, an rxe device on each
# end, and runs ibv_rc_pingpong between them; prints the kernel, whether the
# pingpong ran, and how many UDP datagrams reached namespace b.
# On the guest's Debian 12 kernel (6.1): the devices come up with the right
# GIDs, but the first send fails ("local QP operation error") and b receives
# no datagram: rxe's UDP tunnel socket and route lookups are in the initial
# namespace, which has no route to the namespaces' addresses.
set -u
echo "kernel $(uname -r); $(rdma system show 2>&1)"
ip netns add rxa && ip netns add rxb || exit 1
trap 'ip netns del rxa; ip netns del rxb' EXIT
ip link add va type veth peer name vb
ip link set va netns rxa && ip link set vb netns rxb
ip -n rxa addr add 10.99.0.1/24 dev va && ip -n rxa link set va up
ip -n rxb addr add 10.99.0.2/24 dev vb && ip -n rxb link set vb up
ip netns exec rxa rdma link add rxea type rxe netdev va || exit 1
ip netns exec rxb rdma link add rxeb type rxe netdev vb || exit 1
ip netns exec rxa ibv_devinfo -d rxea -v | grep -E 'GID\[ *1\]'
ip netns exec rxb ibv_devinfo -d rxeb -v | grep -E 'GID\[ *1\]'
ip netns exec rxa timeout 15 ibv_rc_pingpong -d rxea -g 1 -n 5 &
sleep 2
ip netns exec rxb timeout 12 ibv_rc_pingpong -d rxeb -g 1 -n 5 10.99.0.1
rc=$?
wait
echo "pingpong between namespaces: exit $rc"
echo "UDP datagrams received in namespace b: $(ip netns exec rxb nstat -az UdpInDatagrams | awk '/UdpInDatagrams/ {print $2}')"
rdma link del rxea; rdma link del rxeb
exit $rc
