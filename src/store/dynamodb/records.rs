//! What an operator reads and removes: the records that need one, through the sparse attention
//! index; any others, through a scan; and the eviction of one, fenced on the version read.

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use std::collections::HashMap;

use super::{
    ATTENTION_CLAIM, ATTENTION_INDEX, ATTENTION_UNKNOWN, DynamoDbStore, EVICTABLE_CONDITION,
    Failed, LeaseToken, Record, RecordFilter, RecordState, Records, SettleAs, Status, StoreError,
    attr, decode_item, n, s, validate_key,
};
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::operation::scan::ScanError;

impl Records for DynamoDbStore {
    async fn settle(
        &self,
        key: &str,
        token: &LeaseToken,
        settle_as: SettleAs<'_>,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.settle_inner(key, token, settle_as, expires_at_s).await
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        let now = self.clock.now_ms();
        let mut records = match filter.state {
            // Unknown outcomes are either settled so or `at_most_once` claims whose lease ended:
            // both carry the attention attribute, so neither needs a scan.
            Some(RecordState::Unknown) => {
                let mut found = self.query_attention(ATTENTION_CLAIM, filter).await?;
                if !filter.claims_only {
                    found.extend(self.query_attention(ATTENTION_UNKNOWN, filter).await?);
                }
                found
            }
            // A scan bounded at nothing reads nothing (DynamoDB refuses `Limit: 0`).
            _ if filter.max_scanned == 0 => Vec::new(),
            _ => self.scan(filter).await?,
        };
        records.retain(|r| RecordState::selects(filter, r, now));
        records.sort_by(|a, b| {
            b.created_at_ms
                .cmp(&a.created_at_ms)
                .then(a.key.cmp(&b.key))
        });
        records.truncate(filter.limit);
        Ok(records)
    }

    async fn evict(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        validate_key(key)?;
        let now_s = self.clock.now_ms().div_euclid(1000);
        let sent = self
            .send("DeleteItem", || {
                self.client
                    .delete_item()
                    .table_name(&self.cfg.table)
                    .set_key(Some(self.key_value(key)))
                    .condition_expression(EVICTABLE_CONDITION)
                    .expression_attribute_names("#tok", attr::LEASE_TOKEN)
                    .expression_attribute_names("#exp", &self.cfg.ttl_attribute)
                    .expression_attribute_names("#st", attr::STATUS)
                    .expression_attribute_names("#unk", attr::OUTCOME_UNKNOWN)
                    .expression_attribute_values(":tok", s(token.as_str()))
                    .expression_attribute_values(":now_s", n(now_s))
                    .expression_attribute_values(":completed", s(Status::Completed.as_str()))
                    .send()
            })
            .await;
        match sent {
            Ok(_) => Ok(()),
            // An earlier attempt may have deleted the record before its response was lost.
            Err(failed) if failed.maybe_applied_before() => match self.read(key).await? {
                Some(r) if &r.token == token => Err(StoreError::LeaseLost),
                _ => Ok(()),
            },
            Err(failed) => {
                failed.into_condition_failure(|e: &DeleteItemError| match e {
                    DeleteItemError::ConditionalCheckFailedException(_) => Some(None),
                    _ => None,
                })?;
                Err(StoreError::LeaseLost)
            }
        }
    }
}

impl DynamoDbStore {
    /// The records under one attention value, newest first, page by page until `filter.limit`
    /// of them match.
    async fn query_attention(
        &self,
        attention: &str,
        filter: &RecordFilter,
    ) -> Result<Vec<Record>, StoreError> {
        let now = self.clock.now_ms();
        let mut condition = "#att = :att";
        let mut names = HashMap::from([("#att".to_string(), attr::ATTENTION.to_string())]);
        let mut values = HashMap::from([(":att".to_string(), s(attention))]);
        if let Some(since) = filter.since_ms {
            condition = "#att = :att AND #created >= :since";
            names.insert("#created".into(), attr::CREATED_AT.into());
            values.insert(":since".into(), n(since));
        }
        let mut records = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .send("Query", || {
                    self.client
                        .query()
                        .table_name(&self.cfg.table)
                        .index_name(ATTENTION_INDEX)
                        .key_condition_expression(condition)
                        .set_expression_attribute_names(Some(names.clone()))
                        .set_expression_attribute_values(Some(values.clone()))
                        .scan_index_forward(false)
                        .set_exclusive_start_key(start.clone())
                        .send()
                })
                .await
                .map_err(|f: Failed<QueryError>| f.into_store_error())?;
            for item in page.items() {
                let record = decode_item(&self.cfg, item)?;
                if RecordState::selects(filter, &record, now) {
                    records.push(record);
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() || records.len() >= filter.limit {
                return Ok(records);
            }
        }
    }

    /// Every live record `filter` selects among the first `filter.max_scanned` items of a scan
    /// (an operator's command, never the request path). The tool and time are filtered by the
    /// server.
    async fn scan(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        let now = self.clock.now_ms();
        let mut terms = vec!["#exp >= :now_s"];
        let mut names = HashMap::from([("#exp".to_string(), self.cfg.ttl_attribute.clone())]);
        let mut values = HashMap::from([(":now_s".to_string(), n(now.div_euclid(1000)))]);
        if let Some(tool) = &filter.tool {
            terms.push("#tool = :tool");
            names.insert("#tool".into(), attr::TOOL.into());
            values.insert(":tool".into(), s(tool));
        }
        if let Some(since) = filter.since_ms {
            terms.push("#created >= :since");
            names.insert("#created".into(), attr::CREATED_AT.into());
            values.insert(":since".into(), n(since));
        }
        let expression = terms.join(" AND ");
        let mut records = Vec::new();
        let mut start = None;
        let mut scanned = 0usize;
        loop {
            let page = self
                .send("Scan", || {
                    self.client
                        .scan()
                        .table_name(&self.cfg.table)
                        .filter_expression(&expression)
                        .set_expression_attribute_names(Some(names.clone()))
                        .set_expression_attribute_values(Some(values.clone()))
                        .set_exclusive_start_key(start.clone())
                        .set_limit(i32::try_from(filter.max_scanned - scanned).ok())
                        .send()
                })
                .await
                .map_err(|f: Failed<ScanError>| f.into_store_error())?;
            // What DynamoDB read, before the filter: what the scan costs.
            scanned += usize::try_from(page.scanned_count()).unwrap_or(0);
            for item in page.items() {
                let record = decode_item(&self.cfg, item)?;
                if RecordState::selects(filter, &record, now) {
                    records.push(record);
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() || scanned >= filter.max_scanned {
                return Ok(records);
            }
        }
    }
}
