"""The demo's parts: simulated back ends, the load driver, the supervised dev stack, and
what ``mqgather dev`` / ``demo`` read off it. Never used by the production worker."""
