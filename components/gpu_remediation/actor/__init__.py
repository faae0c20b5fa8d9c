"""Reservation's actor, which runs inside the cluster (standard library only), apart from the
Pulumi program that ships it."""
