"""The shared port contract (tests/storage) run against DynamoCheckpointStore and DynamoChunkLog.

The contract's test functions are imported as they are; pytest collects them here, where the
``store`` and ``log`` fixtures (tests/aws/conftest.py) are the moto-backed AWS adapters.
"""

from __future__ import annotations

from tests.storage.test_storage_contract import (
    test_a_created_record_is_handed_out_without_the_writers_value,
    test_a_fenced_claim_or_save_says_which_write_expected_which_version,
    test_a_turn_starts_from_the_last_checkpoint_of_its_chats_previous_run,
    test_a_writer_with_a_stale_version_can_write_neither_checkpoint_nor_chunks,
    test_a_writers_value_is_used_for_its_save_only_and_never_handed_back,
    test_adapters_satisfy_the_protocols,
    test_append_and_read_at_any_start,
    test_append_at_wrong_start_raises_conflict_and_writes_nothing,
    test_append_is_atomic,
    test_chunks_round_trip_exactly,
    test_claim_bumps_epoch_and_version,
    test_create_starts_at_version_1_epoch_0_and_load_returns_it,
    test_create_twice_raises_run_exists,
    test_empty_append_changes_nothing,
    test_every_log_refuses_what_some_log_could_not_store,
    test_loaded_records_do_not_alias_the_store,
    test_log_fence,
    test_negative_read_arguments_are_rejected,
    test_never_written_log_is_empty,
    test_open_returns_the_count,
    test_runs_are_independent,
    test_save_bumps_version_keeps_epoch_and_replaces_fields,
    test_save_with_stale_version_raises_fenced_and_writes_nothing,
    test_summary_is_the_records_status_and_owner_and_follows_saves,
    test_tail_is_the_count_and_the_last_chunks,
    test_the_latest_run_of_a_chat_is_the_one_its_principal_created_last,
    test_unknown_run_raises_not_found,
    test_version_reads_the_heads_version,
)

__all__ = [
    "test_a_created_record_is_handed_out_without_the_writers_value",
    "test_a_fenced_claim_or_save_says_which_write_expected_which_version",
    "test_a_turn_starts_from_the_last_checkpoint_of_its_chats_previous_run",
    "test_a_writer_with_a_stale_version_can_write_neither_checkpoint_nor_chunks",
    "test_a_writers_value_is_used_for_its_save_only_and_never_handed_back",
    "test_adapters_satisfy_the_protocols",
    "test_append_and_read_at_any_start",
    "test_append_at_wrong_start_raises_conflict_and_writes_nothing",
    "test_append_is_atomic",
    "test_chunks_round_trip_exactly",
    "test_claim_bumps_epoch_and_version",
    "test_create_starts_at_version_1_epoch_0_and_load_returns_it",
    "test_create_twice_raises_run_exists",
    "test_empty_append_changes_nothing",
    "test_every_log_refuses_what_some_log_could_not_store",
    "test_loaded_records_do_not_alias_the_store",
    "test_log_fence",
    "test_negative_read_arguments_are_rejected",
    "test_never_written_log_is_empty",
    "test_open_returns_the_count",
    "test_runs_are_independent",
    "test_save_bumps_version_keeps_epoch_and_replaces_fields",
    "test_save_with_stale_version_raises_fenced_and_writes_nothing",
    "test_summary_is_the_records_status_and_owner_and_follows_saves",
    "test_tail_is_the_count_and_the_last_chunks",
    "test_the_latest_run_of_a_chat_is_the_one_its_principal_created_last",
    "test_unknown_run_raises_not_found",
    "test_version_reads_the_heads_version",
]
