//! The operation of an admission review (`request.operation`): what the kinds table says is
//! mutated, per kind, and what the webhook reads off the wire. A leaf, so that the table
//! (`kinds`), the custom kinds' file and the wire format share the type without importing the
//! workload reader that parses objects.

/// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn parse(wire: &str) -> Option<Self> {
        match wire {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            "CONNECT" => Some(Operation::Connect),
            _ => None,
        }
    }
}
