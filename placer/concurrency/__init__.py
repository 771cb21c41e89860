"""Concurrency control (the IPDPS 2019 runtime, issue 17): how many threads run each op and how many ops run
at once. Today: session thread settings, TensorFlow's recommended ones, and choosing one by timing them side by
side (`placer tune`)."""

from placer.concurrency.settings import (
    ThreadSetting, TuneResult, global_settings, recommended_setting, sockets, tune, tuning_candidates,
)

__all__ = ["ThreadSetting", "TuneResult", "global_settings", "recommended_setting", "sockets", "tune",
           "tuning_candidates"]
