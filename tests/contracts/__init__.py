"""Contract suites: check functions that every implementation of a part's protocol must pass.

Each module holds the checks of one protocol (``storage``: :class:`rlreplay.storage.Storage`;
``episode_index``: :class:`rlreplay.episodes.EpisodeIndex`), written against the protocol only,
so that a new implementation (another array library, another device) is checked by
parametrising the ``test_*`` module over one more factory.
"""
