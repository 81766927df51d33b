//! The webhook's skimming parser against serde_json on arbitrary bodies: see
//! `syncgc::webhook::review::check_skim` for what must hold.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    syncgc::webhook::review::check_skim(body);
});
