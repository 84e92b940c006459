"""What every runtime component shares: process groups, log tails, backoff, supervised children and the
typed supervisor↔worker channel. Imports only the standard library, kept libraries and motor.protocol."""
