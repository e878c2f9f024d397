pub mod cosignature;
