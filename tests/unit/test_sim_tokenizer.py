from motor.tokenize.sim_vocab import (
    EOS_ID,
    FIRST_WORD_ID,
    IM_END_ID,
    IM_START_ID,
    VOCAB_SIZE,
    decode,
    decode_token,
    encode,
    render_chat,
)


def test_words_and_punctuation_are_tokens_and_stable() -> None:
    ids = encode("Hello, world!")
    assert len(ids) == 4
    assert ids == encode("Hello ,   world !")
    assert ids[1] != ids[3]
    assert all(FIRST_WORD_ID <= token < VOCAB_SIZE for token in ids)


def test_same_word_same_id_and_case_matters() -> None:
    assert encode("cat cat")[0] == encode("cat cat")[1]
    assert encode("cat") != encode("Cat")


def test_special_tokens_have_fixed_ids() -> None:
    assert encode("<|im_start|>user<|im_end|><|endoftext|>") == [
        IM_START_ID,
        encode("user")[0],
        IM_END_ID,
        EOS_ID,
    ]


def test_every_word_id_decodes_to_a_distinct_word() -> None:
    words = [decode_token(token) for token in range(FIRST_WORD_ID, VOCAB_SIZE)]
    assert len(set(words)) == len(words)
    assert all(word.startswith(" ") and word[1:].isalpha() for word in words)


def test_special_tokens_decode_to_nothing() -> None:
    assert decode([EOS_ID, IM_START_ID, IM_END_ID]) == ""
    assert decode([FIRST_WORD_ID, EOS_ID]) == decode_token(FIRST_WORD_ID)


def test_chat_template_is_chatml_with_an_open_assistant_turn() -> None:
    text = render_chat([("system", "be brief"), ("user", "hi")])
    assert (
        text
        == "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert not render_chat([("user", "hi")], add_generation_prompt=False).endswith("assistant\n")
    assert encode(text)[0] == IM_START_ID
