"""The Analytic Configurator: closed-form schedules, predictions and derivations."""
from nova.configurator.cost import predict, roofline_floor_s
from nova.configurator.gemm import Config, ScheduleError, check_schedule, configure
from nova.configurator.problem import ACTIVATIONS, DTYPES, GemmProblem, ProblemError
from nova.configurator.schedule import MmaInstr, Prediction, Schedule, Step

__all__ = ["configure", "Config", "ScheduleError", "check_schedule", "predict", "roofline_floor_s",
           "GemmProblem", "ProblemError", "DTYPES", "ACTIVATIONS", "Schedule", "MmaInstr", "Prediction", "Step"]
