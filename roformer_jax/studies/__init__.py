"""The lab, one concept a module: runs of a study (study), a run's directory and resume checks
(run_dirs), raw export and restore (raw_files), a study's record (study_record), tables and
interval texts (tables), statistics (stats), figures (plots), the compare study's report
(compare_report), the results page (results_page, with page_source, page_numbers,
page_provenance, page_long_doc), the length study (length_study) and its tables
(length_report), the long-document study (long_doc_study, long_doc_report, bow_baseline) and
its task builder (long_doc_task, with long_doc_articles, long_doc_windows, tfidf), and what
training did to a position table (position_table).

Only experiments/ and the tests import this sub-package; the library never does."""
