//! The table's setup, and the error that says how to create it.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};

use super::item::attr;
use super::{DynamoLedger, unavailable};
use crate::ledger::LedgerError;

impl DynamoLedger {
    /// Creates the ledger's table (on-demand capacity, key `pk`), as the SAM template does.
    /// For local use and tests; TTL is left to the deployment (see the README).
    pub async fn create_table(client: &Client, table: &str) -> Result<(), LedgerError> {
        client
            .create_table()
            .table_name(table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(attr::PK)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(unavailable)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(attr::PK)
                    .key_type(KeyType::Hash)
                    .build()
                    .map_err(unavailable)?,
            )
            .send()
            .await
            .map_err(|e| unavailable(e.into_service_error()))?;
        Ok(())
    }

    pub(super) fn no_table(&self) -> LedgerError {
        LedgerError::Unavailable(
            format!(
                "the ledger table {:?} does not exist: create it (`slack-once create-table`, \
                 or deploy the SAM template) or fix DEDUP_TABLE",
                self.table
            )
            .into(),
        )
    }
}
