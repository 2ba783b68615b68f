//! The board's `[expect]` table: capacities and cluster ids the file states, which must
//! agree with what its cluster data gives (as Linux computes it).

use std::fmt;

use crate::schema::{Board, BoardError, Ctx, ExpectFile};
use crate::topology;

/// Checks `[expect]` (if the file has one) against the validated `board`.
pub(crate) fn check(board: &Board, expect: Option<ExpectFile>, file: &str) -> Result<(), BoardError> {
    let cx = Ctx { file };
    let smp = board.smp();
    let Some(exp) = expect else { return Ok(()) };
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
    if stated.len() != computed.len() {
        return Err(cx.err(
            field,
            format!("{} values for qemu.smp = {smp} CPUs", stated.len()),
            &format!("give one value per CPU: {computed:?}"),
        ));
    }
    if let Some(cpu) = (0..stated.len()).find(|&i| stated[i] != computed[i]) {
        return Err(cx.err(
            format!("{field}[{cpu}]"),
            format!("states {:?} for cpu {cpu} but the board data gives {:?} ({how})", stated[cpu], computed[cpu]),
            &format!("fix the cluster data or set {field} = {computed:?}"),
        ));
    }
    Ok(())
}
