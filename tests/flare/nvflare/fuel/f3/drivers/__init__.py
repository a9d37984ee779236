"""Stand-in: nvflare.fuel.f3.drivers."""
