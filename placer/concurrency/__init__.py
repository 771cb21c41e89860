"""Concurrency control (the IPDPS 2019 runtime): how many threads run each op and how many ops run
at once: session thread settings, TensorFlow's recommended ones, and choosing one by timing them side by side
(`placer tune`); a performance model of op time against threads (`performance_model`), op costs profiled at each width
(`width_costs`), and a setting chosen by simulating every one from either (`choose`); per-op threads by
placement on workers of different widths (`widths`)."""

from placer.concurrency.settings import (
    ThreadSetting, TuneResult, global_settings, recommended_setting, sockets, tune, tuning_candidates,
)

__all__ = ["ThreadSetting", "TuneResult", "global_settings", "recommended_setting", "sockets", "tune",
           "tuning_candidates"]
