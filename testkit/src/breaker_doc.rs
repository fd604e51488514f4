//! The breaker's transition table rendered for `docs/breaker.md`: the table and diagram
//! embedded there are produced by these functions, and `core/tests/breaker_transitions.rs`
//! checks the doc holds exactly what they render.

use peerblock_core::breaker::TRANSITIONS;

/// [`TRANSITIONS`] as a Markdown table (the one embedded in `docs/breaker.md`).
pub fn render_transition_table() -> String {
    let mut out = String::from("| from | event | to | effect |\n|---|---|---|---|\n");
    for t in TRANSITIONS {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            t.from, t.event, t.to, t.effect
        ));
    }
    out
}

/// The state-changing rows of [`TRANSITIONS`] as a Mermaid `stateDiagram-v2` (the diagram
/// embedded in `docs/breaker.md`). Self-loops are left to the table.
pub fn render_state_diagram() -> String {
    let mut out = String::from("stateDiagram-v2\n    [*] --> Closed\n");
    for t in TRANSITIONS.iter().filter(|t| t.from != t.to) {
        out.push_str(&format!(
            "    {:?} --> {:?}: {}\n",
            t.from,
            t.to,
            t.event.describe().replace('`', "")
        ));
    }
    out
}
