"""An offline look-up that misses the kernel cache records what it wanted; ``nova precompile misses``
builds exactly those kernels on a host with MLIR (the device's torch may trace a model into other
kernels than the host's, so the host cannot always derive them itself)."""
import pytest

from nova.runtime.cache import KernelCache, NotPrecompiledError


def _tiny_step():
    from nova.compiler.explain import plan_training_step
    planned, _ = plan_training_step("tiny", 2, 16, "adamw", "h200")
    return planned


def test_every_offline_miss_of_a_step_is_recorded_then_built(tmp_path, capsys):
    """Each kernel of a step looked up offline in an empty cache leaves one record naming its family,
    problem, schedule, role and target; ``nova precompile misses`` builds each under the key the
    look-up used, forgets the records, and the same look-ups then all hit."""
    pytest.importorskip("mlir")
    from nova.cli.main import main
    from nova.compiler.precompile import missing_kernels
    from nova.hwmodel import get_target
    cache = KernelCache(tmp_path / "cache")
    planned = _tiny_step()
    missing = missing_kernels(planned, get_target("h200"), cache)
    records = [r for _, r in cache.misses()]
    assert len(missing) >= 5 and len(records) == len(missing)
    assert {r["summary"] for r in records} == {m.removeprefix("not precompiled: ") for m in missing}
    assert {r["family"] for r in records} >= {"gemm", "rows", "multi_tensor"}
    assert all(r["target"] == ("h200", "sm_90") for r in records)

    assert main(["cache", "list", "--cache-dir", str(cache.root)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"{len(records)} recorded misses in {cache.misses_dir} (kernels an offline run looked up and did not "
        f"find): `nova precompile misses --cache-dir {cache.root}` builds them")
    assert main(["precompile", "misses", "--cache-dir", str(cache.root)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"built {len(records)} recorded misses into {cache.root}: {len(records)} compiled")
    assert cache.misses() == [] and missing_kernels(planned, get_target("h200"), cache) == []
    assert main(["precompile", "misses", "--cache-dir", str(cache.root)]) == 0
    assert capsys.readouterr().out.strip() == f"no recorded misses in {cache.misses_dir}"
    assert main(["cache", "list", "--cache-dir", str(cache.root)]) == 0
    assert "recorded misses" not in capsys.readouterr().out


def test_the_miss_message_names_the_record_and_the_command(tmp_path):
    from nova.hwmodel import get_target
    from nova.kernels.gemm.problem import GemmProblem
    from nova.runtime.matmul import configure_schedule, get_or_compile
    cache = KernelCache(tmp_path / "cache")
    problem = GemmProblem(64, 96, 32, "tf32")
    target = get_target("h200")
    with pytest.raises(NotPrecompiledError) as e:
        get_or_compile(problem, configure_schedule(problem, target), target, cache, offline=True)
    message = str(e.value)
    assert "\n" not in message and f"nova precompile misses --cache-dir {cache.root}" in message
    (path, record), = cache.misses()
    assert path.stem == e.value.key == record["key"] and record["problem"] == problem


def test_a_record_this_nova_would_key_otherwise_fails_and_is_kept(tmp_path, capsys):
    """A record left by another Nova (its key differs from this Nova's for the same kernel) is not
    built under a key nobody looks up: reported as failed, kept, exit 1."""
    pytest.importorskip("mlir")
    from nova.cli.main import main
    from nova.hwmodel import get_target
    from nova.kernels.gemm.problem import GemmProblem
    from nova.runtime.matmul import configure_schedule
    cache = KernelCache(tmp_path / "cache")
    problem = GemmProblem(64, 96, 32, "tf32")
    schedule = configure_schedule(problem, get_target("h200"))
    from nova.kernels.gemm.family import family_of
    cache.record_miss("0" * 64, {"family": family_of(schedule), "problem": problem, "schedule": schedule,
                                 "role": None, "target": ("h200", "sm_90"), "summary": "a GEMM"})
    assert main(["precompile", "misses", "--cache-dir", str(cache.root)]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "another Nova version" in out and len(cache.misses()) == 1


def test_precompile_misses_takes_no_target_and_the_others_need_one(tmp_path, capsys):
    from nova.cli.main import main
    assert main(["precompile", "misses", "--target", "h200", "--cache-dir", str(tmp_path)]) == 2
    assert "--target: precompile misses builds what the offline run recorded" in capsys.readouterr().err
    assert main(["precompile", "gemm", "--shapes", "64", "--cache-dir", str(tmp_path)]) == 2
    assert "precompile gemm needs --target" in capsys.readouterr().err


def test_a_program_that_misses_records_every_kernel_and_counts_them(tmp_path, monkeypatch):
    """The executor's one error for an offline program: every kernel of the plan looked up (each
    recorded), counted in one line naming the command; a plan with one miss keeps that miss's own
    message."""
    from nova.compiler.executor import Program
    from nova.hwmodel import get_target
    from nova.runtime import driver
    from nova.runtime.matmul import configure_schedule, get_or_compile
    from nova.kernels.gemm.problem import GemmProblem
    monkeypatch.setattr(driver, "get_device", lambda index=None: None)    # no GPU: the target is named
    cache = KernelCache(tmp_path / "cache")
    program = Program(_tiny_step(), "meta", target="h200")
    problem = GemmProblem(64, 96, 32, "tf32")
    with pytest.raises(NotPrecompiledError) as first:
        get_or_compile(problem, configure_schedule(problem, get_target("h200")), get_target("h200"), cache,
                       offline=True)
    error = program._every_miss(first.value)
    message = str(error)
    count = int(message.split()[0])
    assert isinstance(error, NotPrecompiledError) and "\n" not in message and count >= 5
    assert message.startswith(f"{count} kernels of train_tiny are not precompiled for h200 in {cache.root} (the first: ")
    assert message.endswith(f"each is recorded in {cache.misses_dir}: on a machine with MLIR run "
                            f"`nova precompile misses --cache-dir {cache.root}` and carry the cache directory back")
    assert len(cache.misses()) == count + 1           # the step's kernels and the lone GEMM looked up above


def test_a_record_that_cannot_be_kept_never_hides_the_miss(tmp_path):
    """A problem that does not pickle, or a cache directory that cannot be written: no record, None."""
    cache = KernelCache(tmp_path / "cache")
    assert cache.record_miss("0" * 64, {"problem": lambda: None}) is None and cache.misses() == []
    (tmp_path / "file").write_text("")
    assert KernelCache(tmp_path / "file").record_miss("0" * 64, {"problem": 1}) is None
