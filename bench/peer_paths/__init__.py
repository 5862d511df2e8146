"""The paths ``bench/peers.py`` measures: Sluice's three, the Python stream processors a team would
pick instead, and a raw aiokafka loop.  Each runs in its own worker process (``peers.py --worker``),
so its memory and CPU are its own; :mod:`.work` holds what every path shares."""
