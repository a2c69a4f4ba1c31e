//! The article's corpus spec as data: six tool schemas, twelve base calls, and where each call sits in
//! its agent run. Identifiers are lowercase (case folding leaves them alone); mixed-case identifiers
//! appear only in the adversarial section.

use super::pyjson::PyJson;

/// The six tools, in corpus order.
pub(crate) const TOOLS: [&str; 6] = [
    "charge_card",
    "create_ticket",
    "send_email",
    "book_slot",
    "refund",
    "provision_vm",
];

/// The JSON Schema a user of this tool would write for each tool: types, enums for closed sets,
/// `format` for timestamps and addresses, and `x-dedup: casefold` on free text a model may re-case
/// (`ignore` where the wording carries no meaning). These tools create things, so an optional
/// field's `null` means "none": the nullable ones say so with `"default": null` (a partial-update
/// tool, where `null` clears a field, would leave the default out).
pub(crate) fn schema_text(tool: &str) -> &'static str {
    match tool {
        "charge_card" => CHARGE_CARD,
        "create_ticket" => CREATE_TICKET,
        "send_email" => SEND_EMAIL,
        "book_slot" => BOOK_SLOT,
        "refund" => REFUND,
        "provision_vm" => PROVISION_VM,
        other => panic!("no schema for tool {other}"),
    }
}

const CHARGE_CARD: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "charge_card",
  "description": "Charge a customer's saved card.",
  "type": "object",
  "properties": {
    "customer_id": {"type": "string", "description": "Customer id, e.g. cus_4f9a2c (case-sensitive)."},
    "amount": {"type": "integer", "description": "Amount in minor units (cents)."},
    "currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY", "CAD"]},
    "description": {"type": "string", "description": "Shown on the invoice.", "x-dedup": "casefold"},
    "receipt_email": {"type": ["string", "null"], "default": null, "format": "email"},
    "capture": {"type": "boolean", "description": "Capture now (true) or only authorize (false)."},
    "statement_descriptor": {"type": ["string", "null"], "default": null, "x-dedup": "casefold"},
    "billing_address": {
      "type": ["object", "null"], "default": null,
      "properties": {
        "line1": {"type": "string", "x-dedup": "casefold"},
        "city": {"type": "string", "x-dedup": "casefold"},
        "zip": {"type": "string", "description": "Postal code; leading zeros matter."},
        "country": {"type": "string", "enum": ["US", "CA", "GB", "FR", "DE", "ES", "JP"]}
      },
      "required": ["line1", "city", "zip", "country"]
    },
    "payment_methods": {
      "type": "array",
      "description": "Saved payment method ids to try, in order.",
      "items": {"type": "string"}
    },
    "metadata": {
      "type": ["object", "null"], "default": null,
      "properties": {
        "order_id": {"type": "string"},
        "channel": {"type": "string", "enum": ["web", "app", "phone"]},
        "external_ref": {"type": "integer", "description": "Ledger reference, a 64-bit integer."}
      }
    }
  },
  "required": ["customer_id", "amount", "currency"],
  "additionalProperties": false
}"#;

const CREATE_TICKET: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "create_ticket",
  "description": "Open a helpdesk ticket.",
  "type": "object",
  "properties": {
    "title": {"type": "string", "x-dedup": "casefold"},
    "description": {"type": "string", "x-dedup": "casefold"},
    "priority": {"type": "string", "enum": ["low", "normal", "high", "urgent"]},
    "requester_email": {"type": "string", "format": "email"},
    "assignee": {"type": ["string", "null"], "default": null, "description": "Chat user id, e.g. U02ABCDEF (case-sensitive)."},
    "due_at": {"type": ["string", "null"], "default": null, "format": "date-time"},
    "location": {
      "type": "object",
      "properties": {
        "building": {"type": "string"},
        "floor": {"type": "integer"}
      }
    },
    "tags": {"type": "array", "items": {"type": "string", "x-dedup": "casefold"}},
    "component": {"type": "string", "enum": ["payments", "hardware", "network", "accounts"]},
    "app_version": {"type": "string", "description": "Version string, e.g. 4.10."},
    "steps_to_reproduce": {"type": "array", "items": {"type": "string", "x-dedup": "casefold"}}
  },
  "required": ["title", "description", "priority"],
  "additionalProperties": false
}"#;

const SEND_EMAIL: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "send_email",
  "description": "Send an email, now or at send_at.",
  "type": "object",
  "properties": {
    "to": {"type": "array", "items": {"type": "string", "format": "email"}},
    "cc": {"type": ["array", "null"], "default": null, "items": {"type": "string", "format": "email"}},
    "subject": {"type": "string", "x-dedup": "casefold"},
    "body": {"type": "string", "x-dedup": "casefold"},
    "send_at": {"type": "string", "format": "date-time"},
    "reply_to": {"type": "string", "format": "email"},
    "template_id": {"type": "string", "description": "Template id (case-sensitive)."},
    "template_version": {"type": "string", "description": "Version string, e.g. 3.20."},
    "thread_id": {"type": "integer", "description": "Mail thread id, a 64-bit integer."},
    "attachments": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "filename": {"type": "string"},
          "size_bytes": {"type": "integer"}
        },
        "required": ["filename"]
      }
    }
  },
  "required": ["to", "subject", "body"],
  "additionalProperties": false
}"#;

const BOOK_SLOT: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "book_slot",
  "description": "Book a room or an appointment slot.",
  "type": "object",
  "properties": {
    "resource_id": {"type": "string"},
    "start": {"type": "string", "format": "date-time"},
    "end": {"type": "string", "format": "date-time"},
    "title": {"type": "string", "x-dedup": "casefold"},
    "attendees": {
      "type": ["array", "null"], "default": null,
      "items": {
        "type": "object",
        "properties": {
          "email": {"type": "string", "format": "email"},
          "name": {"type": "string", "x-dedup": "casefold"}
        }
      }
    },
    "attendee_count": {"type": "integer"},
    "notes": {"type": ["string", "null"], "default": null, "x-dedup": "casefold"},
    "patient": {
      "type": ["object", "null"], "default": null,
      "properties": {
        "name": {"type": "string", "x-dedup": "casefold"},
        "phone": {"type": "string"},
        "phone_ext": {"type": "string", "description": "Extension; leading zeros matter."},
        "date_of_birth": {"type": "string", "format": "date"}
      }
    },
    "reminder_minutes": {"type": "integer"},
    "preferred_slots": {
      "type": "array",
      "description": "Fallback start times, most preferred first.",
      "items": {"type": "string", "format": "date-time"}
    },
    "calendar_event_id": {"type": "integer", "description": "Calendar event id, a 64-bit integer."}
  },
  "required": ["resource_id", "start", "end"],
  "additionalProperties": false
}"#;

const REFUND: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "refund",
  "description": "Refund all or part of a charge.",
  "type": "object",
  "properties": {
    "charge_id": {"type": "string"},
    "amount": {"type": "number", "description": "Amount in major units, e.g. 19.99."},
    "currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY", "CAD"]},
    "reason": {"type": "string", "enum": ["duplicate", "fraudulent", "requested_by_customer", "product_not_received"]},
    "note": {"type": ["string", "null"], "default": null, "description": "Internal note; its wording does not change the refund.", "x-dedup": "ignore"},
    "notify_customer": {"type": "boolean"},
    "line_items": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string"},
          "quantity": {"type": "integer"},
          "amount": {"type": "number"}
        },
        "required": ["sku", "quantity", "amount"]
      }
    },
    "order_id": {"type": "string", "description": "Order number; leading zeros matter."},
    "ledger_entry_id": {"type": "integer", "description": "Ledger entry id, beyond 64 bits."}
  },
  "required": ["charge_id", "amount", "currency", "reason"],
  "additionalProperties": false
}"#;

const PROVISION_VM: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "provision_vm",
  "description": "Create a virtual machine.",
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "region": {"type": "string", "enum": ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2"]},
    "instance_type": {"type": "string", "enum": ["t3.small", "t3.medium", "m6i.large", "c6i.2xlarge", "g5.xlarge"]},
    "image": {"type": "string"},
    "image_version": {"type": "string", "description": "Version string, e.g. 1.10."},
    "kubernetes_version": {"type": "string", "description": "Version string, e.g. 1.30."},
    "disk_gb": {"type": "integer"},
    "spot": {"type": "boolean"},
    "max_price_per_hour": {"type": ["number", "null"], "default": null},
    "ports": {"type": "array", "items": {"type": "integer"}},
    "tags": {"type": "object", "additionalProperties": {"type": "string", "x-dedup": "casefold"}},
    "expires_at": {"type": "string", "format": "date-time"},
    "ssh_key_name": {"type": "string"},
    "git_ref": {"type": "string", "description": "Git branch or tag to check out (case-sensitive)."},
    "bootstrap_script": {"type": "string", "description": "S3 URL of the bootstrap script (case-sensitive)."},
    "boot_order": {"type": "array", "items": {"type": "string", "enum": ["disk", "network", "cdrom"]}},
    "dns_servers": {"type": "array", "description": "Resolvers, tried in order.", "items": {"type": "string", "format": "ipv4"}}
  },
  "required": ["name", "region", "instance_type", "image"],
  "additionalProperties": false
}"#;

/// One base call: where it sits in its agent run, and its arguments as Python would print them.
pub(crate) struct Base {
    /// `<tool>.<n>`, e.g. `charge_card.1`.
    pub(crate) id: &'static str,
    pub(crate) tool: &'static str,
    pub(crate) run_id: &'static str,
    pub(crate) step: u32,
    pub(crate) args: &'static str,
}

/// The twelve base calls, two per tool.
pub(crate) const BASES: [Base; 12] = [
    Base {
        id: "charge_card.1",
        tool: "charge_card",
        run_id: "run-7f3a91c2",
        step: 4,
        args: r#"{"customer_id": "cus_4f9a2c", "amount": 4200, "currency": "USD", "description": "Annual Pro plan renewal", "receipt_email": "Dana.Whitfield@example.com", "capture": true, "metadata": {"order_id": "ord-10023", "channel": "web"}}"#,
    },
    Base {
        id: "charge_card.2",
        tool: "charge_card",
        run_id: "run-0b8e2d54",
        step: 7,
        args: r#"{"customer_id": "cus_b71e09", "amount": 129900, "currency": "EUR", "description": "Standing desk, oak finish, delivery included", "receipt_email": null, "capture": false, "statement_descriptor": "ACME FURNITURE", "billing_address": {"line1": "12 Rue de la Paix", "city": "Paris", "zip": "75002", "country": "FR"}}"#,
    },
    Base {
        id: "create_ticket.1",
        tool: "create_ticket",
        run_id: "run-c41d7e06",
        step: 2,
        args: r#"{"title": "Printer on floor 3 keeps jamming", "description": "The printer by the east stairwell jams on every double-sided job since Monday.", "priority": "high", "requester_email": "m.okafor@example.com", "assignee": null, "due_at": "2026-08-14T17:00:00Z", "location": {"building": "hq-2", "floor": 3}, "tags": ["hardware", "printer"]}"#,
    },
    Base {
        id: "create_ticket.2",
        tool: "create_ticket",
        run_id: "run-5e92a0f7",
        step: 5,
        args: r#"{"title": "Refund not received for order ord-88412", "description": "Customer reports the refund issued on 2 August has not reached their card. Their bank says nothing is pending.", "priority": "normal", "requester_email": "support@example.com", "tags": ["billing", "refund"], "component": "payments"}"#,
    },
    Base {
        id: "send_email.1",
        tool: "send_email",
        run_id: "run-7f3a91c2",
        step: 5,
        args: r#"{"to": ["Priya.Raman@example.com"], "cc": null, "subject": "Your August invoice is ready", "body": "Hi Priya,\n\nYour invoice for August is attached. The total due is $1,250.00, payable by 31 August.\n\nThanks,\nThe billing team", "attachments": [{"filename": "inv-2026-0841.pdf", "size_bytes": 48213}]}"#,
    },
    Base {
        id: "send_email.2",
        tool: "send_email",
        run_id: "run-a3f60b19",
        step: 9,
        args: r#"{"to": ["ops-oncall@example.com", "j.chen@example.com"], "cc": ["Lead.SRE@example.com"], "subject": "Maintenance window Saturday 02:00\u201304:00 UTC", "body": "Database failover drill. Expect up to 5 minutes of read-only mode.", "send_at": "2026-08-15T18:00:00Z", "reply_to": "noc@example.com", "template_id": "maint-notice-v2"}"#,
    },
    Base {
        id: "book_slot.1",
        tool: "book_slot",
        run_id: "run-c41d7e06",
        step: 3,
        args: r#"{"resource_id": "room-4b", "start": "2026-08-11T09:00:00Z", "end": "2026-08-11T09:30:00Z", "title": "Design review: checkout redesign", "attendees": [{"email": "a.ferreira@example.com", "name": "Ana Ferreira"}, {"email": "t.nguyen@example.com", "name": "Tuan Nguyen"}], "attendee_count": 2, "notes": null}"#,
    },
    Base {
        id: "book_slot.2",
        tool: "book_slot",
        run_id: "run-19d4b8e3",
        step: 1,
        args: r#"{"resource_id": "physio-clinic-2", "start": "2026-09-02T14:15:00Z", "end": "2026-09-02T15:00:00Z", "title": "Physiotherapy follow-up", "patient": {"name": "Jos\u00e9 \u00c1lvarez", "phone": "+34 612 345 678", "date_of_birth": "1984-03-07"}, "reminder_minutes": 60}"#,
    },
    Base {
        id: "refund.1",
        tool: "refund",
        run_id: "run-5e92a0f7",
        step: 6,
        args: r#"{"charge_id": "ch_3n8k2p", "amount": 19.99, "currency": "USD", "reason": "requested_by_customer", "note": "Customer changed their mind within the 14 day window.", "notify_customer": true}"#,
    },
    Base {
        id: "refund.2",
        tool: "refund",
        run_id: "run-e06c3a71",
        step: 3,
        args: r#"{"charge_id": "ch_9q1w7z", "amount": 64.5, "currency": "GBP", "reason": "product_not_received", "line_items": [{"sku": "sku-tea-250g", "quantity": 2, "amount": 12.25}, {"sku": "sku-mug-01", "quantity": 1, "amount": 40}], "note": null, "notify_customer": false}"#,
    },
    Base {
        id: "provision_vm.1",
        tool: "provision_vm",
        run_id: "run-2b7f1c88",
        step: 2,
        args: r#"{"name": "ci-runner-07", "region": "us-east-1", "instance_type": "c6i.2xlarge", "image": "ami-0a1b2c3d4e5f67890", "disk_gb": 200, "spot": true, "max_price_per_hour": 0.17, "ports": [22, 443], "tags": {"team": "platform", "cost_center": "cc-4410"}, "expires_at": "2026-08-12T06:00:00Z"}"#,
    },
    Base {
        id: "provision_vm.2",
        tool: "provision_vm",
        run_id: "run-a3f60b19",
        step: 11,
        args: r#"{"name": "gpu-train-3", "region": "eu-west-1", "instance_type": "g5.xlarge", "image": "ami-07f3e9d2c1b0a4567", "disk_gb": 500, "spot": false, "max_price_per_hour": null, "ssh_key_name": "ml-team-2026", "tags": {"project": "Fraud model retrain", "owner": "k.ito@example.com"}}"#,
    },
];

/// How many steps after the original a deliberate repeat is issued.
pub(crate) const REPEAT_STEP_GAP: u32 = 3;

/// The base call with id `id`.
pub(crate) fn base(id: &str) -> &'static Base {
    BASES
        .iter()
        .find(|b| b.id == id)
        .unwrap_or_else(|| panic!("no base call {id}"))
}

impl Base {
    pub(crate) fn value(&self) -> PyJson {
        PyJson::parse(self.args)
    }
}

/// One value-changed pair per base: the path changed, the new value, and why it is a new call.
pub(crate) const VALUE_CHANGES: [(&str, &str, &str, &str); 12] = [
    ("charge_card.1", "amount", "4500", "amount 4200 -> 4500"),
    (
        "charge_card.2",
        "currency",
        r#""GBP""#,
        "currency EUR -> GBP",
    ),
    (
        "create_ticket.1",
        "priority",
        r#""urgent""#,
        "priority high -> urgent",
    ),
    (
        "create_ticket.2",
        "title",
        r#""Refund not received for order ord-88413""#,
        "the order named in the title: ord-88412 -> ord-88413",
    ),
    (
        "send_email.1",
        "to",
        r#"["Arjun.Raman@example.com"]"#,
        "recipient Priya.Raman -> Arjun.Raman",
    ),
    (
        "send_email.2",
        "send_at",
        r#""2026-08-15T19:00:00Z""#,
        "send_at 18:00Z -> 19:00Z",
    ),
    (
        "book_slot.1",
        "resource_id",
        r#""room-4c""#,
        "room room-4b -> room-4c",
    ),
    (
        "book_slot.2",
        "patient.date_of_birth",
        r#""1984-07-03""#,
        "patient date of birth 1984-03-07 -> 1984-07-03 (another patient)",
    ),
    ("refund.1", "amount", "9.99", "amount 19.99 -> 9.99"),
    (
        "refund.2",
        "line_items.0.quantity",
        "3",
        "first line item quantity 2 -> 3",
    ),
    (
        "provision_vm.1",
        "region",
        r#""us-west-2""#,
        "region us-east-1 -> us-west-2",
    ),
    ("provision_vm.2", "disk_gb", "1000", "disk_gb 500 -> 1000"),
];
