"""What the rows and embedding lowerings share: the target of the program's device, the launch of a
meta program (refused), and the kernel that launches a multi-role problem with pointers fixed at
build time (``nova.kernels.role_launch``: resolved on first use, then launched on the current stream)."""
from __future__ import annotations

import torch


def device_target(ctx):
    """The GPU model the program's kernels are sized for: the context's (a meta program: the plan's
    target), else the device's (``NOVA_TARGET`` or the device's preset)."""
    if ctx.target is not None:
        return ctx.target
    from nova.runtime import driver
    from nova.runtime.matmul import resolve_target
    return resolve_target(None, driver.get_device(ctx.device.index))


def meta_only():
    from nova.compiler.plan_view import ExecutorError
    raise ExecutorError("a meta program only describes; build it on a CUDA device to run it")


class RoleKernels:
    """Launches the problem's kernels with fixed pointers on the current stream (resolved on first use
    through the family's ``RoleLauncher``)."""

    def __init__(self, launcher, problem, pointers: dict, workspace, device):
        self.launcher = launcher
        self.problem, self.pointers, self.workspace, self.device = problem, pointers, workspace, device
        self.launches = None

    def __call__(self) -> None:
        if self.launches is None:
            resolved = self.launcher.resolve(self.problem, self.device.index)
            self.launches = self.launcher.launch_args(resolved, self.pointers,
                                                      0 if self.workspace is None else self.workspace.data_ptr())
        stream = torch.cuda.current_stream(self.device).cuda_stream
        for kernel, args in self.launches:
            kernel.launch(args, stream)
