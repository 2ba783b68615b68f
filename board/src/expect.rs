//! The board's `[expect]` table: capacities, cluster ids and energy-model costs the file
//! states, which must agree with what its cluster data gives (as Linux computes it).

use std::fmt;

use crate::error::{BoardError, Ctx};
use crate::model::Board;
use crate::schema::ExpectFile;
use crate::topology;

/// Checks `[expect]` (if the file has one) against the validated `board`.
pub(crate) fn check(board: &Board, expect: Option<ExpectFile>, file: &str) -> Result<(), BoardError> {
    let cx = Ctx { file };
    let smp = board.smp();
    let Some(exp) = expect else { return Ok(()) };
    if let Some(costs) = exp.em_cost {
        let computed: Vec<u64> = board.clusters().iter().filter_map(|c| crate::eas::em_cost(board, c)).collect();
        check_stated_per(
            &cx,
            "expect.em_cost",
            &costs,
            &computed,
            ("cluster", &format!("{} clusters", board.clusters().len())),
            "power * 10 / capacity as kernel/power/energy_model.c computes it from the cluster's eas data",
        )?;
    }
    let computed = topology::expected_topology(board);
    if let Some(caps) = exp.cpu_capacity {
        check_stated(
            &cx,
            "expect.cpu_capacity",
            &caps,
            &computed.iter().map(|e| e.capacity).collect::<Vec<_>>(),
            smp,
            "capacity_dmips_mhz * max clock, normalised to 1024 as drivers/base/arch_topology.c does",
        )?;
    }
    if let Some(ids) = exp.cluster_id {
        check_stated(
            &cx,
            "expect.cluster_id",
            &ids,
            &computed.iter().map(|e| e.cluster_id).collect::<Vec<_>>(),
            smp,
            "the cpu-map cluster index (cpu_map.layout = \"single\" puts every CPU in cluster 0)",
        )?;
    }
    Ok(())
}

fn check_stated<T: PartialEq + fmt::Debug>(
    cx: &Ctx<'_>,
    field: &str,
    stated: &[T],
    computed: &[T],
    smp: u32,
    how: &str,
) -> Result<(), BoardError> {
    check_stated_per(cx, field, stated, computed, ("cpu", &format!("qemu.smp = {smp} CPUs")), how)
}

/// One stated value per `item` (cpu, cluster) against the computed ones.
fn check_stated_per<T: PartialEq + fmt::Debug>(
    cx: &Ctx<'_>,
    field: &str,
    stated: &[T],
    computed: &[T],
    (item, per): (&str, &str),
    how: &str,
) -> Result<(), BoardError> {
    if stated.len() != computed.len() {
        return Err(cx.err(
            field,
            format!("{} values for {per}", stated.len()),
            &format!("give one value per {item}: {computed:?}"),
        ));
    }
    if let Some(i) = (0..stated.len()).find(|&i| stated[i] != computed[i]) {
        return Err(cx.err(
            format!("{field}[{i}]"),
            format!("states {:?} for {item} {i} but the board data gives {:?} ({how})", stated[i], computed[i]),
            &format!("fix the cluster data or set {field} = {computed:?}"),
        ));
    }
    Ok(())
}
