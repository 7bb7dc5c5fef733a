use super::*;
use crate::run::results::CellStatus;

fn cell(column: &str, round: u32) -> CellResult {
    let mut c: CellResult = serde_json::from_value(serde_json::json!({
        "column": column, "round": round, "status": {"status": "ok"}, "command": "x",
        "log": "l", "wall_s": 1.0, "phases": {}, "warnings": [], "errors": [],
        "boot": null, "guest_rc": 0, "vmm_rc": 0, "lower_bound": false
    }))
    .unwrap();
    c.status = CellStatus::Ok;
    c
}

#[test]
fn header_then_one_synced_line_per_cell() {
    let d = tempfile::tempdir().unwrap();
    let h = Header {
        viommu_bench_partial: RunInfo {
            tool: "viommu-bench 0.1.0 (abc)".into(),
            cells_planned: 6,
            ..Default::default()
        },
    };
    let mut f = PartialFile::create(d.path(), &h).unwrap();
    f.append(&cell("a", 0)).unwrap();
    f.append(&cell("b", 0)).unwrap();
    let text = std::fs::read_to_string(d.path().join(PARTIAL_NAME)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(header_of(lines[0]), Some(h));
    assert_eq!(header_of(lines[1]), None);
    let c: CellResult = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(c.column, "b");
    assert_eq!(resolve(d.path()), d.path().join(PARTIAL_NAME));
    std::fs::write(d.path().join("results.json"), "{}").unwrap();
    assert_eq!(resolve(d.path()), d.path().join("results.json"));
}
