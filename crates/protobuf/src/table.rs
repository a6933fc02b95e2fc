//! The finished schema table: parsed by `schema.rs`, then each field's zero bytes computed
//! by the encoder (`encode.rs`), so the encoder can copy them where a field is absent. Kept
//! apart from both so that neither depends on the other's finished form.

use std::sync::OnceLock;

use crate::encode::ProtoEncoder;
use crate::schema::Schema;

/// The table generated for the Kubernetes minor listwatch follows.
const KUBE_SCHEMA: &str = include_str!("../schema/kube.json");

impl Schema {
    /// The built-in schema (parsed on first use).
    pub fn kubernetes() -> &'static Schema {
        static SCHEMA: OnceLock<Schema> = OnceLock::new();
        SCHEMA.get_or_init(|| {
            // The table is generated and checked in; a parse failure is a build defect
            // caught by every test, not something a client can cause.
            #[allow(clippy::expect_used)]
            Schema::parse(KUBE_SCHEMA).expect("generated schema table parses")
        })
    }

    /// Parses a schema table in the generator's JSON form.
    pub fn parse(text: &str) -> Result<Schema, String> {
        let mut schema = Schema::parse_unfinished(text)?;
        schema.fill_zeros()?;
        Ok(schema)
    }

    /// Computes every field's [`Field::zero`](crate::Field::zero) bytes with the encoder's own rules.
    fn fill_zeros(&mut self) -> Result<(), String> {
        let zeros = {
            let mut enc = ProtoEncoder::new(self);
            let mut all = Vec::with_capacity(self.messages.len());
            for m in &self.messages {
                let mut per_field = Vec::with_capacity(m.fields.len());
                for f in &m.fields {
                    let mut out = Vec::new();
                    if !f.inline {
                        enc.zero(f, &mut out, 0)
                            .map_err(|e| format!("{}.{}: {e}", m.name, f.json))?;
                    }
                    per_field.push(out);
                }
                all.push(per_field);
            }
            all
        };
        for (m, per_field) in self.messages.iter_mut().zip(zeros) {
            for (i, (f, zero)) in m.fields.iter_mut().zip(per_field).enumerate() {
                if !zero.is_empty() {
                    m.zero_mask |= 1 << i;
                }
                f.zero = zero.into();
            }
        }
        Ok(())
    }
}
