"""Issue 19: a record is read wherever it stands -- behind any launcher's or collector's prefix,
inside an envelope, compressed, in UTF-16, several to a line -- and files become runs as a user
means them.

Variants are generated here from the real logs under ../shared/reference/logs (the format fixtures
when it is absent), each written from the tool's documented output (journald's short and short-iso
output modes, RFC 5424 and RFC 3164 syslog, docker's json-file driver, CloudWatch Logs'
get-log-events JSON, GCP Cloud Logging's LogEntry textPayload / jsonPayload, kubectl logs --prefix,
stern's default template, pdsh, mpirun --tag-output, SageMaker's MPI prefix, Ray, SkyPilot,
torchrun --role). Every variant must read to the same steps as the undecorated original.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pooltk.logs import LogFormatError, read_log_file, read_logs

from _real_logs import FIX, VALUES  # noqa: E402  (tests/logs/_real_logs.py)


def _lines(src: Path) -> tuple[list[str], bool]:
    text = src.read_text(encoding="utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), text.endswith("\n")


def _write(path: Path, lines: list[str], newline: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if newline else ""), encoding="utf-8")
    return path


def _same(plain: pd.DataFrame, got: pd.DataFrame, what: str) -> None:
    assert len(got) == len(plain), what
    pd.testing.assert_frame_equal(
        got[VALUES].reset_index(drop=True),
        plain[VALUES].reset_index(drop=True),
        check_categorical=False,
        obj=what,
    )


PREFIXES = {  # name: (prefix for line i, column the prefix must fill, value)
    "journald_short_iso": (
        lambda i: f"2026-05-20T02:{i // 60 % 60:02d}:{i % 60:02d}+0000 node7 python3[4242]: ",
        "host",
        "node7",
    ),
    "journald_short": (
        lambda i: f"May 20 02:{i // 60 % 60:02d}:{i % 60:02d} node7 python3[4242]: ",
        "host",
        "node7",
    ),
    "rfc5424": (
        lambda i: (
            f"<14>1 2026-05-20T02:22:{i % 60:02d}.003Z node7.example.com trainer 4242 ID47 - "
        ),
        "host",
        "node7.example.com",
    ),
    "rfc3164": (lambda i: f"<34>Oct 11 22:14:{i % 60:02d} node7 trainer[4242]: ", "host", "node7"),
    "kubectl_prefix": (lambda i: "[pod/trainer-worker-0/pytorch] ", "pod", "trainer-worker-0"),
    "stern": (lambda i: "trainer-worker-1 pytorch ", "pod", "trainer-worker-1"),
    "pdsh": (lambda i: "gpu-node-3: ", "host", "gpu-node-3"),
    "mpirun_tag_output": (lambda i: "[1,5]<stdout>:", "rank", 5),
    "sagemaker_mpi": (lambda i: "[1,mpirank:6,algo-2]<stdout>:", "host", "algo-2"),
    "ray": (lambda i: "(RayTrainWorker pid=4242, ip=10.0.0.2) ", "host", "10.0.0.2"),
    "skypilot": (lambda i: "(worker1, rank=1, pid=2367, ip=10.0.0.9) ", "host", "10.0.0.9"),
    "torchrun_role": (lambda i: "[trainer3]:", "rank", 3),
    "kubectl_timestamps_srun": (
        lambda i: f"2026-05-20T02:22:{i % 60:02d}.123456789Z {i % 4:3d}: ",
        "task",
        None,
    ),
    "unknown": (lambda i: "~~ some launcher we never heard of >> ", None, None),
    "warning_then_record": (
        lambda i: "W0519 19:31:09.464000 1 warnings.py:1] a rank's warning with no newline ",
        None,
        None,
    ),
    "progress_bar": (
        lambda i: "Epoch 1:  42%|████▏     | 420/1000 [00:42<00:58, 10.0it/s] ",
        None,
        None,
    ),
}


@pytest.mark.parametrize("how", sorted(PREFIXES))
def test_every_launcher_and_collector_prefix_reads_to_the_same_steps(base_logs, tmp_path, how):
    prefix, column, value = PREFIXES[how]
    for src in base_logs:
        lines, newline = _lines(src)
        plain = read_log_file(src).steps
        got = read_log_file(
            _write(
                tmp_path / f"{how}_{src.name}",
                [prefix(i) + ln for i, ln in enumerate(lines)],
                newline,
            )
        ).steps
        _same(plain, got, f"{src.name} {how}")
        if column in ("host", "pod"):
            assert set(got[column].dropna().astype(str)) == {value}, (src.name, how)
        elif column == "rank" and plain["rank"].isna().all():
            assert set(got["rank"].dropna()) == {value}, (src.name, how)
        elif column == "task":
            assert set(got["task"].dropna()) <= {0, 1, 2, 3} and got["task"].notna().all(), (
                src.name,
                how,
            )


def test_two_ranks_records_on_one_physical_line_are_two_rows(base_logs, tmp_path):
    for src in base_logs:
        plain_file = read_log_file(src)
        plain = plain_file.steps
        if len(plain) < 2 or plain_file.files[0].n_skipped:
            continue  # a record glued to a line already garbled (digits run into digits) is cut,
            # by construction
        lines, newline = _lines(src)
        for joiner in (" ", "", "[rank1]:"):
            pairs = [joiner.join(lines[i : i + 2]) for i in range(0, len(lines), 2)]
            got = read_log_file(
                _write(tmp_path / f"joined_{len(joiner)}_{src.name}", pairs, newline)
            ).steps
            _same(plain, got, f"{src.name} joined by {joiner!r}")


def test_docker_json_file_records_are_unwrapped_including_a_line_split_in_16k_pieces(
    base_logs, tmp_path
):
    for src in base_logs:
        lines, _ = _lines(src)
        out = []
        for i, ln in enumerate(lines):
            text = ln + "\n"
            pieces = (
                [text[k : k + 40] for k in range(0, len(text), 40)] if i % 3 == 0 else [text]
            )  # docker splits long lines
            out += [
                json.dumps(
                    {"log": p, "stream": "stdout", "time": f"2026-05-20T02:22:{i % 60:02d}.5Z"}
                )
                for p in pieces
            ]
        table = read_log_file(_write(tmp_path / f"{src.stem}-json.log", out))
        _same(read_log_file(src).steps, table.steps, f"docker {src.name}")
        assert (
            "docker" in table.files[0].decorations and table.steps["collector_time"].notna().all()
        )


def test_cloudwatch_and_gcp_exports_are_unwrapped_and_put_in_time_order(base_logs, tmp_path):
    for src in base_logs:
        lines, _ = _lines(src)
        plain = read_log_file(src).steps
        events = [
            {
                "timestamp": 1_747_700_000_000 + i,
                "message": ln,
                "ingestionTime": 1_747_700_009_000,
                "logStreamName": "algo-1",
            }
            for i, ln in enumerate(lines)
        ]
        cw = tmp_path / f"{src.stem}.cloudwatch.json"
        cw.write_text(json.dumps({"events": events, "nextForwardToken": "f/1"}))
        _same(plain, read_log_file(cw).steps, f"cloudwatch {src.name}")
        entries = [
            {
                "textPayload": ln,
                "timestamp": f"2026-05-20T02:{i // 60 % 60:02d}:{i % 60:02d}.{i:06d}Z",
                "resource": {
                    "type": "k8s_container",
                    "labels": {"pod_name": "trainer-0", "namespace_name": "ml"},
                },
                "severity": "INFO",
                "logName": "projects/p/logs/stdout",
            }
            for i, ln in enumerate(lines)
        ]
        gcp = tmp_path / f"{src.stem}.gcp.json"
        gcp.write_text(
            json.dumps(entries[::-1], indent=2)
        )  # gcloud logging read: newest first, pretty-printed
        got = read_log_file(gcp).steps
        _same(plain, got, f"gcp {src.name}")
        assert set(got["pod"].dropna().astype(str)) == {"trainer-0"}
        sink = tmp_path / f"{src.stem}.gcp.jsonl"
        sink.write_text(
            "".join(
                json.dumps({"jsonPayload": {"message": ln}, "timestamp": e["timestamp"]}) + "\n"
                for ln, e in zip(lines, entries, strict=True)
            )
        )
        _same(plain, read_log_file(sink).steps, f"gcp jsonPayload {src.name}")


def test_a_cloudwatch_export_mixing_number_and_text_stamps_reads_in_its_own_order(
    base_logs, tmp_path
):
    """Stamps of two kinds cannot be ordered against each other: the export's order is kept."""
    for src in base_logs:
        lines, _ = _lines(src)
        events = [
            {
                "timestamp": f"2026-05-20T02:22:{i % 60:02d}Z" if i % 2 else 1_747_700_000_000 + i,
                "message": ln,
                "logStreamName": "algo-1",
            }
            for i, ln in enumerate(lines)
        ]
        cw = tmp_path / f"{src.stem}.mixed.cloudwatch.json"
        cw.write_text(json.dumps({"events": events}))
        _same(read_log_file(src).steps, read_log_file(cw).steps, f"mixed stamps {src.name}")


@pytest.mark.parametrize("how", ["bom", "utf-16-le", "utf-16-be", "gzip", "bz2", "xz", "zstd"])
def test_bom_utf16_and_every_compression_by_magic_bytes(base_logs, tmp_path, how):
    for src in base_logs:
        raw = src.read_bytes()
        if how == "bom":
            data = b"\xef\xbb\xbf" + raw
        elif how.startswith("utf-16"):
            data = ("\ufeff" + raw.decode()).encode(how.replace("-le", "-le").replace("-be", "-be"))
        elif how == "zstd":
            zstandard = pytest.importorskip("zstandard")
            data = zstandard.ZstdCompressor().compress(raw)
        else:
            data = {"gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[how](raw)
        path = tmp_path / f"{src.name}.data"  # no telling suffix: the magic bytes decide
        path.write_bytes(data)
        table = read_log_file(path)
        _same(read_log_file(src).steps, table.steps, f"{how} {src.name}")
        assert table.files[0].compression == (how if how in ("gzip", "bz2", "xz", "zstd") else None)


def test_an_archive_or_utf16_without_bom_is_an_error_naming_it(tmp_path):
    (tmp_path / "a.log").write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    with pytest.raises(LogFormatError, match="zip archive"):
        read_log_file(tmp_path / "a.log")
    (tmp_path / "b.log").write_bytes(
        (FIX / "automodel_text_current.log").read_text().encode("utf-16-le")
    )
    with pytest.raises(LogFormatError, match="UTF-16 text without a byte-order mark"):
        read_log_file(tmp_path / "b.log")


def test_a_job_killed_mid_number_is_counted_as_truncated_never_a_value(tmp_path):
    whole = (
        "2025-08-22 02:40:40 | INFO | root | step {s} | epoch 0 | loss 2.4001 | "
        "grad_norm 1.7001 | lr 1.00e-05 | "
        "mem 32.39 GiB | tps 9196.97(4598.48/gpu) | num_label_tokens 524288"
    )
    text = (
        "\n".join(whole.format(s=s) for s in range(1, 4)) + "\n" + whole.format(s=4)[:-3]
    )  # cut: 524288 -> 524
    table = read_log_file(_write(tmp_path / "killed.log", [text], newline=False))
    assert list(table.steps["step"]) == [1, 2, 3] and table.files[0].n_truncated == 1
    cut_tps = (
        text.rsplit("\n", 1)[0] + "\n" + whole.format(s=4).split("(")[0][:-3]
    )  # cut: tps 9196.97 -> 9196
    table = read_log_file(_write(tmp_path / "killed2.log", [cut_tps], newline=False))
    assert list(table.steps["step"]) == [1, 2, 3] and table.files[0].n_truncated == 1
    rec = json.dumps({"step": 9, "epoch": 0, "loss": 1.25, "num_label_tokens": 524288})
    table = read_log_file(
        _write(
            tmp_path / "cut_training.jsonl",
            [rec, rec.replace('"step": 9', '"step": 10')[:-4]],
            newline=False,
        )
    )
    assert list(table.steps["step"]) == [9] and table.files[0].n_truncated == 1


def test_the_cli_says_how_many_records_were_cut(tmp_path, capsys):
    from pooltk.cli import main

    whole = (
        "2025-08-22 02:40:40 | INFO | root | step {s} | epoch 0 | loss 2.4001 | "
        "mem 32.39 GiB | num_label_tokens 524288"
    )
    path = _write(
        tmp_path / "killed.log",
        [whole.format(s=s) for s in range(1, 5)] + [whole.format(s=5)[:-3]],
        newline=False,
    )
    assert main(["logs", str(path)]) == 0
    assert "1 record(s) cut short (truncated" in capsys.readouterr().out


def test_an_unknown_envelope_gets_an_error_that_names_it_and_the_format_flag(tmp_path, capsys):
    from pooltk.cli import main

    path = tmp_path / "wrapped.log"
    path.write_text(
        "".join(
            json.dumps({"payload": {"text": f"iteration {i} done"}, "ts": i}) + "\n"
            for i in range(3)
        )
    )
    assert main(["logs", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        "envelope" in err
        and "--format" in err
        and "format=" not in err.replace("(format= in Python)", "")
    )
    assert "first step" not in err


def test_an_sbatch_output_whose_srun_section_starts_late_is_read(tmp_path):
    setup = [
        f"+ module load cuda/12.{i % 9}  # sbatch preamble line {i}, "
        "long enough to fill space quickly"
        for i in range(260_000)
    ]
    records = [f"{s % 4:3d}: " + _titan(s, f"01:00:{s % 60:02d}") for s in range(1, 41)]
    table = read_log_file(
        _write(tmp_path / "slurm-4242.out", setup + records)
    )  # ~21 MiB before the first record
    assert list(table.steps["step"]) == list(range(1, 41)) and set(table.steps["task"]) == {
        0,
        1,
        2,
        3,
    }


# ------------------------------------------------------------------------ runs as a user means them


def _titan(step: int, clock: str, rank: int | None = None) -> str:
    pre = f"[rank{rank}]:" if rank is not None else ""
    return (
        f"{pre}[titan] 2026-11-01 {clock},000 - root - INFO - step: {step:2}  "
        f"loss: {10 - step / 10:7.4f}  "
        "memory: 10.00GiB(5.00%)  tps: 1,000  mfu: 1.00%"
    )


def test_per_rank_files_of_one_job_are_one_run_with_the_rank_from_the_name(tmp_path):
    layouts = {
        "a": "rank_{r}.log",
        "b": "rank{r}.log",
        "c": "out-4242-{r}.txt",
        "d": "std_log_process_{r}.txt",
    }
    for folder, pattern in layouts.items():
        job = tmp_path / f"job_{folder}"
        job.mkdir()
        for r in range(4):
            _write(job / pattern.format(r=r), [_titan(s, f"01:00:{s:02d}") for s in range(1, 6)])
        table = read_logs(job)
        # srun -o out-%j-%t: the job id stays in the run's name
        assert set(table.steps["run"]) == ({"out-4242"} if folder == "c" else {f"job_{folder}"}), (
            pattern
        )
        assert sorted(set(table.steps["rank"])) == [0, 1, 2, 3], pattern
        assert all("per-rank files" in why for why in table.run_sources.values())


def test_the_same_file_name_in_two_job_folders_is_two_runs(tmp_path):
    for job in ("jobA", "jobB"):
        (tmp_path / job).mkdir()
        _write(tmp_path / job / "rank_0.log", [_titan(s, f"01:00:{s:02d}") for s in range(1, 6)])
        _write(tmp_path / job / "rank_1.log", [_titan(s, f"01:00:{s:02d}") for s in range(1, 6)])
    table = read_logs(tmp_path)
    assert set(table.steps["run"]) == {"jobA", "jobB"}
    for job in ("A", "B"):
        tree = tmp_path / f"logdir{job}" / "run1234" / "attempt_0" / "0"
        tree.mkdir(parents=True)
        _write(tree / "stdout.log", [_titan(s, f"01:00:{s:02d}") for s in range(1, 6)])
    table = read_logs([tmp_path / "logdirA", tmp_path / "logdirB"])
    assert len(set(table.steps["run"])) == 2  # two torchrun --log-dir trees are two runs


def test_a_rotated_log_joins_its_run_in_order(tmp_path):
    job = tmp_path / "job7"
    job.mkdir()
    _write(job / "train.log.2", [_titan(s, f"01:00:{s:02d}") for s in range(1, 4)])
    _write(job / "train.log.1", [_titan(s, f"01:00:{s:02d}") for s in range(4, 7)])
    _write(job / "train.log", [_titan(s, f"01:00:{s:02d}") for s in range(7, 10)])
    table = read_logs(job)
    assert set(table.steps["run"]) == {"job7"} and list(table.steps["step"]) == list(range(1, 10))


def test_a_dst_fall_back_and_an_eight_second_node_skew_do_not_split_a_run_but_a_restart_does(
    tmp_path,
):
    dst = [_titan(s, f"01:{s:02d}:00") for s in range(1, 30)] + [
        _titan(s, f"01:{s - 29:02d}:30") for s in range(30, 60)
    ]
    assert read_log_file(_write(tmp_path / "dst.log", dst)).files[0].runs == ["dst"]
    skew = []
    for s in range(1, 40):  # rank 1's node clock runs 8 s behind rank 0's
        skew += [
            _titan(s, f"01:{s // 6:02d}:{s * 10 % 60:02d}", rank=0),
            _titan(s, f"01:{s // 6:02d}:{s * 10 % 60:02d}", rank=1),
        ]
    skew = [ln.replace(",000 - root", ",000 - root") for ln in skew]
    skewed = [
        ln if "[rank0]" in ln else ln.replace(" 2026-11-01 01:", " 2026-11-01 00:") for ln in skew
    ]
    assert read_log_file(_write(tmp_path / "skew.log", skewed)).files[0].runs == ["skew"]
    restart = [_titan(s, f"01:00:{s:02d}") for s in range(1, 10)] + [
        _titan(s, f"01:01:{s:02d}") for s in range(5, 10)
    ]
    f = read_log_file(_write(tmp_path / "restart.log", restart)).files[0]
    assert (
        f.runs == ["restart#1", "restart#2"] and "step went back from 9 to 5" in f.run_boundaries[0]
    )


# ----------------------------------------------------------------------- any prefix, the same steps

_PREFIX_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='{"'),
    max_size=40,
).filter(
    lambda t: (
        not any(w in t for w in ("step", "loss", "epoch", "Rank", "[titan]"))
        and not t.endswith(tuple("0123456789"))
    )
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(_PREFIX_TEXT, min_size=1, max_size=8), st.data())
def test_any_prefix_before_a_record_reads_the_same_steps(tmp_path, prefixes, data):
    src = data.draw(st.sampled_from(sorted(FIX.glob("*.log"))))
    lines, newline = _lines(src)
    decorated = [prefixes[i % len(prefixes)] + ln for i, ln in enumerate(lines)]
    path = _write(tmp_path / f"any_{src.name}", decorated, newline)
    _same(read_log_file(src).steps, read_log_file(path).steps, f"{src.name} behind {prefixes!r}")
