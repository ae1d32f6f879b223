"""The virtual kubelet's runner (vk/runner.py): status reports from callbacks."""

from __future__ import annotations

import asyncio
import logging

from catamaran.vk.runner import VirtualKubelet


class RefusingClient:
    async def get(self, *args, **kwargs):
        raise RuntimeError("the API server is away")


def test_a_status_report_from_a_callback_is_kept_until_done_and_its_failure_logged(caplog):
    kubelet = VirtualKubelet(
        RefusingClient(), foreign_cluster="provider", namespace="catamaran-system", consumer_id="c", node_ip="10.0.0.1"
    )

    async def report() -> None:
        kubelet._report_soon("ProviderReachable", "virtual node is serving", ready=True)
        [task] = kubelet._reports
        await asyncio.gather(task, return_exceptions=True)
        assert not kubelet._reports

    with caplog.at_level(logging.ERROR, logger="catamaran.vk.runner"):
        asyncio.run(report())
    [record] = [r for r in caplog.records if r.name == "catamaran.vk.runner"]
    assert record.getMessage() == "cannot report the foreign cluster's status"
    assert "the API server is away" in str(record.exc_info[1])
