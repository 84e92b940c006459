from motor.engine.sim.sampling import GREEDY_SEED, output_token, sampling_seed
from motor.tokenize.sim_vocab import EOS_ID, IM_END_ID, IM_START_ID, VOCAB_SIZE

CONTEXT = bytes(16)


def test_tokens_are_a_function_of_context_seed_and_position() -> None:
    reference = [output_token(CONTEXT, 7, position, allow_eos=True) for position in range(32)]
    assert reference == [output_token(CONTEXT, 7, position, allow_eos=True) for position in range(32)]
    assert reference != [output_token(CONTEXT, 8, position, allow_eos=True) for position in range(32)]
    assert reference != [
        output_token(b"\x01" + CONTEXT[1:], 7, position, allow_eos=True) for position in range(32)
    ]
    assert len(set(reference)) > 16


def test_tokens_are_words_or_eos_never_template_markers() -> None:
    tokens = {output_token(CONTEXT, seed, 0, allow_eos=True) for seed in range(100000)}
    assert IM_START_ID not in tokens and IM_END_ID not in tokens
    assert EOS_ID in tokens
    assert all(0 <= token < VOCAB_SIZE for token in tokens)


def test_eos_is_redrawn_while_not_allowed() -> None:
    seed = next(seed for seed in range(100000) if output_token(CONTEXT, seed, 0, allow_eos=True) == EOS_ID)
    replacement = output_token(CONTEXT, seed, 0, allow_eos=False)
    assert replacement != EOS_ID
    assert replacement == output_token(CONTEXT, seed, 0, allow_eos=False)


def test_greedy_ignores_the_seed_and_sampling_falls_back_to_the_engine_seed() -> None:
    assert sampling_seed(0, 123, 5) == GREEDY_SEED
    assert sampling_seed(0.0, None, 5) == GREEDY_SEED
    assert sampling_seed(1.0, 123, 5) == 123
    assert sampling_seed(None, None, 5) == 5
