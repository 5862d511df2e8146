"""The tracker's wire: what both sides of a connection agree on, and nothing either side keeps.

The message table and its request schema (:mod:`.protocol`, :mod:`.schema`), the frame format
(:mod:`.framing`), the columnar allocation reply (:mod:`.allocation_reply`) and TLS on every hop
(:mod:`.tls`).  It imports nothing else of the tracker, so the client and the server both stand on
it without standing on each other.
"""
