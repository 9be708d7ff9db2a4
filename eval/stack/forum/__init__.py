"""A local forum server: a test double of Discourse for end-to-end tests and the demo.

It loads a forum export (``topics/<id>.json`` as Discourse serves ``/t/{id}.json``, plus ``raw/<id>.md``)
into its own ``forum`` schema of a PostgreSQL database and serves, over HTTP, the subset of Discourse's
API the bot uses with Discourse's JSON and error shapes, sends signed webhooks like Discourse, and has
fault knobs (latency, 429, 5xx, dropped webhooks). It is not production code: the bot reaches it only
over HTTP, exactly as it reaches a real forum. See README.md here.
"""
