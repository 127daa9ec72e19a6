"""Ports for the stacks' servers come from below the kernel's ephemeral range, and are free when picked."""

from __future__ import annotations

import socket

from localstack.net import LOWEST_PORT, ROOM_FOR_REPLICAS, _ephemeral_low, free_port


def test_ports_are_picked_below_the_ephemeral_range_with_room_for_replicas() -> None:
    ports = {free_port() for _ in range(50)}
    assert all(LOWEST_PORT <= port < _ephemeral_low() - ROOM_FOR_REPLICAS for port in ports)
    assert len(ports) > 40  # random picks, not one port again and again


def test_a_picked_port_can_be_listened_on() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", port))
        sock.listen()
