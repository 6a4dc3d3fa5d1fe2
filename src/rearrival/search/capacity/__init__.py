"""Capacity of agent fleets (docs/DESIGN.md §17): for every
configuration x fleet size x router of a space, the goodput under a latency SLO (the
largest session arrival rate whose open plan meets it, by bisection on the rate over the
same pool and seed), the cheapest fleet for a target rate, and the flags that deploy it.

One concern per module: ``space`` sizes and bounds the fleets before they are enumerated;
``bisection`` finds a goodput from any meets-the-SLO function; ``evaluate`` runs one fleet
at one rate and one fleet's whole search; ``pick`` chooses the fleet for a target rate with
its spread over resampled pools; ``deploy`` writes the flags; ``outputs`` and ``figures``
write the folder; ``run`` ties them together with progress and workers.

Import from the modules."""
