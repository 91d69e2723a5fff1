//! DynamoDB's capacity as it bills it: the units an answer reports, and an item's size as
//! DynamoDB counts it. Shared by the benchmark report's counting proxy and the soak's
//! (tests/api/soak/proxy.rs includes this file).

/// The capacity units a DynamoDB answer reports (`ConsumedCapacity`, one or a list).
pub fn consumed(v: &serde_json::Value) -> f64 {
    match v {
        serde_json::Value::Array(items) => items.iter().map(consumed).sum(),
        v => v["CapacityUnits"].as_f64().unwrap_or(0.0),
    }
}

/// An item's size as DynamoDB counts it (its attribute names and values, in bytes), from its
/// JSON wire form (`{"pk": {"S": "…"}, …}`).
pub fn item_size(item: &serde_json::Value) -> usize {
    item.as_object()
        .map(|m| m.iter().map(|(k, v)| k.len() + value_size(v)).sum())
        .unwrap_or(0)
}

fn value_size(v: &serde_json::Value) -> usize {
    let Some((kind, value)) = v.as_object().and_then(|m| m.iter().next()) else {
        return 0;
    };
    let number = |n: &str| {
        let digits = n.trim_start_matches('-').replace('.', "");
        let digits = digits.trim_start_matches('0').trim_end_matches('0');
        digits.len().div_ceil(2) + 1
    };
    match kind.as_str() {
        "S" => value.as_str().map(str::len).unwrap_or(0),
        "N" => value.as_str().map(number).unwrap_or(1),
        "B" => value.as_str().map(|b| b.len() * 3 / 4).unwrap_or(0),
        "BOOL" | "NULL" => 1,
        "SS" => value
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str()).map(str::len).sum())
            .unwrap_or(0),
        "NS" => value
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str()).map(number).sum())
            .unwrap_or(0),
        "L" => {
            3 + value
                .as_array()
                .map(|a| a.iter().map(|e| 1 + value_size(e)).sum::<usize>())
                .unwrap_or(0)
        }
        "M" => {
            3 + value
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, e)| 1 + k.len() + value_size(e))
                        .sum::<usize>()
                })
                .unwrap_or(0)
        }
        _ => 0,
    }
}
