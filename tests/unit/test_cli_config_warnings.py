"""Warnings as `motor validate` and `motor deploy` print them: siblings sharing a message on one line."""

from motor.cli.config_warnings import grouped


def test_siblings_with_the_same_message_are_named_together_in_order() -> None:
    warnings = [
        "a.b.x: not implemented; why",
        "a.b.y: not implemented; why",
        "a.b.z: something else",
        "a.c.x: not implemented; why",
        "top: a top-level key",
        "other: a top-level key",
        "a.b.w: not implemented; why",
    ]
    assert grouped(warnings) == [
        "a.b.{x, y}: not implemented; why",
        "a.b.z: something else",
        "a.c.x: not implemented; why",
        "top: a top-level key",
        "other: a top-level key",
        "a.b.w: not implemented; why",
    ]


def test_a_single_warning_and_messages_holding_colons_are_unchanged() -> None:
    warnings = ["x.y: engine_config.model-path: required: set it"]
    assert grouped(warnings) == warnings
    assert grouped([]) == []
