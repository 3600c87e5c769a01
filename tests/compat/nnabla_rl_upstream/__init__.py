# Not ported: nnabla-rl 0.9.0's tests/replay_buffers/test_memory_efficient_atari_buffer.py. Every
# test there builds its experiences from nnabla-rl's DummyAtariEnv and Atari wrappers
# (``nnabla_rl.environments``, ``build_atari_env``), which rlreplay does not ship; the Atari
# buffers are tested in tests/compat/test_nnabla_rl.py and test_nnabla_rl_prioritized_atari.py.
